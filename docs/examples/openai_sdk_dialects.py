#!/usr/bin/env python3
"""Checks the OpenAI Python SDK's other endpoints against aigw: embeddings, the Responses
API and models.retrieve.

    pip install openai
    AIGW_API_KEY=aigw_... python3 docs/examples/openai_sdk_dialects.py EMBEDDING_MODEL RESPONSES_MODEL

For EMBEDDING_MODEL it makes `embeddings.create` with a string input and a list input; for
RESPONSES_MODEL `responses.create` plain and with `stream=True` (reading every event to the
`response.completed` one), and `models.retrieve` of both, printing what came back and the
usage each reported. AIGW_BASE_URL defaults to http://127.0.0.1:8080/api/v1/ai. Exits
non-zero when a call or a check fails.
"""
import os
import sys

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("AIGW_BASE_URL", "http://127.0.0.1:8080/api/v1/ai"),
    api_key=os.environ["AIGW_API_KEY"],  # an aigw API key with the ai_gateway permission
)
embedding_model, responses_model = sys.argv[1], sys.argv[2]

one = client.embeddings.create(model=embedding_model, input="hello embeddings")
print(f"[{embedding_model}] embeddings(str): {len(one.data)} vector(s) of {len(one.data[0].embedding)}, "
      f"usage: prompt_tokens={one.usage.prompt_tokens}")
assert len(one.data) == 1 and one.usage.prompt_tokens == len("hello embeddings")
many = client.embeddings.create(model=embedding_model, input=["first", "second text"])
print(f"[{embedding_model}] embeddings(list): {len(many.data)} vectors, usage: prompt_tokens={many.usage.prompt_tokens}")
assert len(many.data) == 2 and many.usage.prompt_tokens == len("first") + len("second text")

plain = client.responses.create(model=responses_model, input="hello responses", max_output_tokens=50)
print(f"[{responses_model}] responses: {plain.output_text!r} (usage: input_tokens={plain.usage.input_tokens}, "
      f"cached={plain.usage.input_tokens_details.cached_tokens}, output_tokens={plain.usage.output_tokens}, "
      f"reasoning={plain.usage.output_tokens_details.reasoning_tokens})")
streamed_text, completed = "", None
for event in client.responses.create(model=responses_model, input="hello responses", stream=True):
    if event.type == "response.output_text.delta":
        streamed_text += event.delta
    elif event.type == "response.completed":
        completed = event.response
assert completed is not None, "the stream ended without response.completed"
print(f"[{responses_model}] responses(stream): {streamed_text!r} (usage: input_tokens={completed.usage.input_tokens}, "
      f"output_tokens={completed.usage.output_tokens})")
assert streamed_text == plain.output_text

for model in (embedding_model, responses_model):
    found = client.models.retrieve(model)
    print(f"models.retrieve({model}): id={found.id} endpoints={getattr(found, 'endpoints', None)}")
    assert found.id == model
print("OK")
