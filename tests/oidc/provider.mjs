// An OpenID Connect provider on loopback for aigw's single sign-on tests: oauth2-mock-server
// (discovery, JWKS, authorization code with PKCE, ID tokens signed RS256), told per sign-in
// who signs in. The authorize request's `login_hint` is base64url JSON:
//   {"sub": "…", "email": "…", "email_verified": true, "name": "…", "groups": ["…"],
//    "amr": ["…"], "userinfo": {…},
//    "tweak": "issuer" | "audience" | "expired" | "nonce" | "kid" | "alg-none"}
// and the ID token of the code it returns carries those claims (a tweak forges one part;
// `alg-none` sends it unsigned). The userinfo endpoint answers, for that code's access
// token, `sub` and the claims of `userinfo` (`{"sub": "…"}` there asserts another subject).
// Without a hint, the claims in $AIGW_OIDC_DEFAULT (the same base64url JSON) sign in, when
// set. Prints `issuer <url>` once listening; stops on SIGTERM, or when stdin closes unless
// $AIGW_OIDC_STAY is set.
//
//   node tests/oidc/provider.mjs

import { OAuth2Server } from "oauth2-mock-server";

const server = new OAuth2Server();
await server.issuer.keys.generate("RS256");
// Who signs in with each code handed out, and with each access token.
const byCode = new Map();
const byAccessToken = new Map();
const decode = (hint) => JSON.parse(Buffer.from(hint, "base64url").toString("utf8"));
const fallback = process.env.AIGW_OIDC_DEFAULT ? decode(process.env.AIGW_OIDC_DEFAULT) : null;

server.service.on("beforeAuthorizeRedirect", (redirect, req) => {
  const code = redirect.url.searchParams.get("code");
  const hint = req.query.login_hint;
  if (code && typeof hint === "string") {
    byCode.set(code, decode(hint));
  } else if (code && fallback) {
    byCode.set(code, fallback);
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

server.service.on("beforeResponse", (response, req) => {
  const who = byCode.get(req.body.code);
  if (!who || !response.body.access_token) return;
  byAccessToken.set(response.body.access_token, who);
  if (who.tweak === "alg-none" && response.body.id_token) {
    const payload = response.body.id_token.split(".")[1];
    const header = Buffer.from(JSON.stringify({ alg: "none", typ: "JWT" })).toString("base64url");
    response.body.id_token = `${header}.${payload}.`;
  }
});

server.service.on("beforeUserinfo", (response, req) => {
  const bearer = (req.headers.authorization ?? "").replace(/^Bearer /, "");
  const who = byAccessToken.get(bearer);
  if (!who) {
    response.statusCode = 401;
    response.body = { error: "invalid_token" };
    return;
  }
  response.body = { sub: who.sub, ...(who.userinfo ?? {}) };
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
if (!process.env.AIGW_OIDC_STAY) {
  process.stdin.on("end", stop);
  process.stdin.resume();
}
