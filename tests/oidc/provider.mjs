// An OpenID Connect provider on loopback for aigw's single sign-on tests: oauth2-mock-server
// (discovery, JWKS, authorization code with PKCE, ID tokens signed RS256), told per sign-in
// who signs in. The authorize request's `login_hint` is base64url JSON:
//   {"sub": "…", "email": "…", "email_verified": true, "name": "…", "groups": ["…"],
//    "tweak": "issuer" | "audience" | "expired" | "nonce" | "kid"}
// and the ID token of the code it returns carries those claims (a tweak forges one part).
// Prints `issuer <url>` once listening; stops on SIGTERM or when stdin closes.
//
//   node tests/oidc/provider.mjs

import { OAuth2Server } from "oauth2-mock-server";

const server = new OAuth2Server();
await server.issuer.keys.generate("RS256");
// Who signs in with each code handed out.
const byCode = new Map();

server.service.on("beforeAuthorizeRedirect", (redirect, req) => {
  const code = redirect.url.searchParams.get("code");
  const hint = req.query.login_hint;
  if (code && typeof hint === "string") {
    byCode.set(code, JSON.parse(Buffer.from(hint, "base64url").toString("utf8")));
  }
});

server.service.on("beforeTokenSigning", (token, req) => {
  const who = byCode.get(req.body.code);
  if (!who) return;
  const payload = token.payload;
  for (const claim of ["sub", "email", "email_verified", "name", "groups", "amr"]) {
    if (who[claim] !== undefined) payload[claim] = who[claim];
  }
  switch (who.tweak) {
    case "issuer":
      payload.iss = "https://another-issuer.example";
      break;
    case "audience":
      payload.aud = "another-client";
      break;
    case "expired":
      payload.iat = Math.floor(Date.now() / 1000) - 7200;
      payload.exp = Math.floor(Date.now() / 1000) - 3600;
      break;
    case "nonce":
      payload.nonce = "not-the-nonce";
      break;
    case "kid":
      token.header.kid = "a-key-nobody-published";
      break;
  }
});

await server.start(0, "127.0.0.1");
// The address it listens on, not `localhost` (which may be ::1 first).
server.issuer.url = `http://127.0.0.1:${server.address().port}`;
console.log(`issuer ${server.issuer.url}`);

const stop = async () => {
  await server.stop();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.stdin.on("end", stop);
process.stdin.resume();
