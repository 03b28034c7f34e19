#!/usr/bin/env python3
"""Checks that the official OpenAI Python SDK works against aigw.

    pip install openai
    AIGW_API_KEY=aigw_... python3 docs/examples/openai_sdk_check.py [MODEL ...]

MODEL defaults to `echo`. For each model it makes one plain chat completion and two
streaming ones, without and with `stream_options={"include_usage": True}`, printing what came
back and checking that the three texts are identical, that the plain stream carries no usage
(aigw meters every stream but hides the usage it asked for), and that the stream asked for
usage ends with a chunk holding it and no choices, as OpenAI sends it. Then it asks for a
model that does not exist and prints the SDK's error. AIGW_BASE_URL defaults to
http://127.0.0.1:8080/api/v1/ai. Exits non-zero when a call or a check fails.
"""
import os
import sys

import openai
from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("AIGW_BASE_URL", "http://127.0.0.1:8080/api/v1/ai"),
    api_key=os.environ["AIGW_API_KEY"],  # an aigw API key with the ai_gateway permission
)

print("models:", [m.id for m in client.models.list()])
for model in sys.argv[1:] or ["echo"]:
    messages = [{"role": "user", "content": "hello from the OpenAI SDK"}]
    reply = client.chat.completions.create(model=model, messages=messages)
    print(f"[{model}] plain:     {reply.choices[0].message.content!r} "
          f"(finish_reason={reply.choices[0].finish_reason}, id={reply.id})")
    chunks = list(client.chat.completions.create(model=model, messages=messages, stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    print(f"[{model}] streaming: {text!r}")
    if any(chunk.usage is not None or not chunk.choices for chunk in chunks):
        sys.exit(f"[{model}] a stream without stream_options must carry no usage chunk")
    chunks = list(client.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}))
    with_usage = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    last = chunks[-1]
    if last.choices or last.usage is None or any(c.usage is not None for c in chunks[:-1]):
        sys.exit(f"[{model}] stream_options.include_usage: the last chunk must hold the usage")
    print(f"[{model}] streaming+usage: {with_usage!r} (usage: prompt_tokens={last.usage.prompt_tokens}, "
          f"completion_tokens={last.usage.completion_tokens})")
    if not (reply.choices[0].message.content == text == with_usage):
        sys.exit(f"[{model}] plain and streamed answers differ")

try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    sys.exit("expected an error for an unknown model")
except openai.NotFoundError as e:
    print(f"unknown model: {type(e).__name__} status={e.status_code} code={e.code!r} message={e.message!r}")
rejecting = os.environ.get("AIGW_REJECT_MODEL")
if rejecting:
    # An upstream 400 must reach the SDK as a 400 (BadRequestError, never retried), with the
    # upstream's message.
    try:
        client.chat.completions.create(model=rejecting, messages=[{"role": "user", "content": "x"}])
        sys.exit("expected the upstream's 400")
    except openai.BadRequestError as e:
        print(f"upstream 400: {type(e).__name__} status={e.status_code} code={e.code!r} message={e.message!r}")
        assert "maximum context length" in str(e.message), e.message
print("OK")
