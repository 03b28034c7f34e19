#!/usr/bin/env python3
"""Checks that the official Anthropic Python SDK works against aigw, with nothing but its base
URL and key set.

    pip install anthropic
    AIGW_API_KEY=aigw_... python3 docs/examples/anthropic_sdk_check.py MODEL

For MODEL (an aigw model served by a `kind = "anthropic"` provider) it makes
`messages.create`, `messages.stream` (reading the text and the final message) and
`messages.count_tokens`, the key given as the SDK gives it (`x-api-key`), printing what came
back and the usage. Then it asks for a model that does not exist and prints the SDK's
exception. AIGW_BASE_URL defaults to http://127.0.0.1:8080/api/v1/ai/anthropic. Exits
non-zero when a call or a check fails.
"""
import os
import sys

import anthropic

client = anthropic.Anthropic(
    base_url=os.environ.get("AIGW_BASE_URL", "http://127.0.0.1:8080/api/v1/ai/anthropic"),
    api_key=os.environ["AIGW_API_KEY"],  # an aigw API key with the ai_gateway permission
)
model = sys.argv[1]
messages = [{"role": "user", "content": "hello from the Anthropic SDK"}]

reply = client.messages.create(model=model, max_tokens=64, messages=messages)
text = "".join(block.text for block in reply.content if block.type == "text")
u = reply.usage
print(f"[{model}] create: {text!r} (usage: input_tokens={u.input_tokens}, "
      f"cache_creation={u.cache_creation_input_tokens}, cache_read={u.cache_read_input_tokens}, "
      f"output_tokens={u.output_tokens})")

with client.messages.stream(model=model, max_tokens=64, messages=messages) as stream:
    streamed = "".join(stream.text_stream)
    final = stream.get_final_message()
print(f"[{model}] stream: {streamed!r} (usage: output_tokens={final.usage.output_tokens})")
assert streamed == text, (streamed, text)

counted = client.messages.count_tokens(model=model, messages=messages)
print(f"[{model}] count_tokens: {counted.input_tokens}")

try:
    client.messages.create(model="no-such-model", max_tokens=8, messages=messages)
    sys.exit("an unknown model was answered")
except anthropic.NotFoundError as e:
    print(f"unknown model: {type(e).__name__} status={e.status_code}")
print("OK")
