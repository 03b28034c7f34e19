#!/usr/bin/env python3
"""A tiny fake OpenAI-compatible upstream, for trying aigw's [[providers]] routing offline.

    python3 docs/examples/fake_upstream.py [PORT]        # default port 9099

POST /chat/completions answers a fixed chat.completion (JSON), or server-sent
chat.completion.chunk events ending in `data: [DONE]` when the body has "stream": true.
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

    def do_POST(self):
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
