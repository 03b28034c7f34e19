#!/usr/bin/env python3
"""A tiny fake OpenAI-compatible upstream, for trying aigw's [[providers]] routing offline.

    python3 docs/examples/fake_upstream.py [PORT]        # default port 9099

POST /chat/completions answers a fixed chat.completion (JSON), or server-sent
chat.completion.chunk events ending in `data: [DONE]` when the body has "stream": true.
POST /embeddings answers one 3-number embedding per input with usage (one prompt token per
byte of the input's texts). POST /responses answers a Responses API response (JSON, or with
"stream": true the events response.created, response.output_text.delta, response.completed)
whose usage reports 11 input tokens (3 cached) and 7 output tokens (2 reasoning).
POST /v1/messages answers an Anthropic message (JSON, or server-sent events message_start …
message_stop) whose usage reports 5 input tokens, 2 cache writes, 4 cache reads and 6 output
tokens; POST /v1/messages/count_tokens answers {"input_tokens": 9}.
Like OpenAI, a stream asked for usage ("stream_options": {"include_usage": true}) carries
"usage": null in every chunk and a last chunk with "choices": [] and the usage.
The answer's content is "fake-upstream says hi" followed by the Authorization header it
received, so you can see that aigw sends the provider's api_key, never the caller's.
Two model names misbehave on purpose: "fake-fail" answers 500, "fake-slow" sleeps 30 s.
Standard library only.
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _events(self, events):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, data in events:
            self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
            self.wfile.flush()
        self.close_connection = True

    def _embeddings(self, req):
        inputs = req.get("input")
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        tokens = sum(len(i.encode()) if isinstance(i, str) else len(i) for i in inputs or [])
        data = [{"object": "embedding", "index": n, "embedding": [0.25, 0.5, 0.75]} for n in range(len(inputs or []))]
        return self._send(200, {"object": "list", "data": data, "model": req.get("model"),
                                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _responses(self, req):
        model = req.get("model", "")
        usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 3}, "output_tokens": 7,
                 "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 18}
        text = "fake-upstream responds"
        def response(status, usage):
            return {"id": "resp_fake_1", "object": "response", "created_at": int(time.time()),
                    "status": status, "model": model,
                    "output": [{"type": "message", "id": "msg_fake_1", "status": "completed", "role": "assistant",
                                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                    "usage": usage}
        if not req.get("stream"):
            return self._send(200, response("completed", usage))
        events = [("response.created", {"type": "response.created", "sequence_number": 0,
                                        "response": response("in_progress", None)})]
        for n, word in enumerate(["fake-upstream ", "responds"]):
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": n + 1,
                                                          "item_id": "msg_fake_1", "output_index": 0,
                                                          "content_index": 0, "delta": word}))
        events.append(("response.completed", {"type": "response.completed", "sequence_number": 3,
                                              "response": response("completed", usage)}))
        return self._events(events)

    def _messages(self, req):
        model = req.get("model", "")
        if self.path.rstrip("/").endswith("/count_tokens"):
            return self._send(200, {"input_tokens": 9})
        text = "fake-upstream says hi (x-api-key: %s)" % self.headers.get("x-api-key", "none")
        usage = {"input_tokens": 5, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 4, "output_tokens": 6}
        message = {"id": "msg_fake_1", "type": "message", "role": "assistant", "model": model,
                   "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                   "stop_sequence": None, "usage": usage}
        if not req.get("stream"):
            return self._send(200, message)
        start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
        return self._events([
            ("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("ping", {"type": "ping"}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": text}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 6}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    def do_POST(self):
        route = self.path.split("?")[0].rstrip("/")
        if route in ("/embeddings", "/responses", "/v1/messages", "/v1/messages/count_tokens"):
            length = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self._send(400, {"error": {"message": "bad json", "type": "invalid_request_error"}})
            if route == "/embeddings":
                return self._embeddings(req)
            if route == "/responses":
                return self._responses(req)
            return self._messages(req)
        if self.path.rstrip("/") != "/chat/completions":
            return self._send(404, {"error": {"message": "no such path", "type": "invalid_request_error"}})
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._send(400, {"error": {"message": "bad json", "type": "invalid_request_error"}})
        model = req.get("model", "")
        if model == "fake-fail":
            return self._send(500, {"error": {"message": "fake upstream failure", "type": "server_error"}})
        if model == "fake-bad-request":
            return self._send(400, {"error": {"message": "This model's maximum context length is 8192 tokens",
                                              "type": "invalid_request_error", "param": "messages",
                                              "code": "context_length_exceeded"}})
        if model == "fake-slow":
            time.sleep(30)
        text = "fake-upstream says hi (auth: %s)" % self.headers.get("Authorization", "none")
        created = int(time.time())
        if not req.get("stream"):
            return self._send(200, {
                "id": "chatcmpl-fake-1",
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5},
            })
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        include_usage = (req.get("stream_options") or {}).get("include_usage") is True

        def send(chunk):
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()

        def event(delta, finish=None):
            chunk = {"id": "chatcmpl-fake-2", "object": "chat.completion.chunk", "created": created,
                     "model": model,
                     "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if include_usage:
                chunk["usage"] = None
            send(chunk)

        event({"role": "assistant", "content": ""})
        words = text.split(" ")
        for i, word in enumerate(words):
            event({"content": word + (" " if i < len(words) - 1 else "")})
        event({}, "stop")
        if include_usage:
            send({"id": "chatcmpl-fake-2", "object": "chat.completion.chunk", "created": created,
                  "model": model, "choices": [],
                  "usage": {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, fmt, *args):
        sys.stderr.write("fake_upstream: " + (fmt % args) + "\n")


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9099
    print(f"fake upstream on http://127.0.0.1:{port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
