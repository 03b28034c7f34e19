#!/usr/bin/env python3
"""Checks that the official OpenAI Python SDK works against aigw.

    pip install openai
    AIGW_API_KEY=aigw_... python3 docs/examples/openai_sdk_check.py [MODEL ...]

MODEL defaults to `echo`. For each model it makes one plain and one streaming chat
completion, printing what came back; then it asks for a model that does not exist and
prints the SDK's error. AIGW_BASE_URL defaults to http://127.0.0.1:8080/api/v1/ai.
Exits non-zero when a call fails.
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
    stream = client.chat.completions.create(model=model, messages=messages, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    print(f"[{model}] streaming: {text!r}")

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
