-- One-time codes of single sign-ons that end in a single-page application: the application
-- exchanges its code (with the PKCE verifier of the challenge it started with) for a token
-- set, once, within a minute. Kept by digest; the admission (account, provider, subject,
-- second factor) is JSON. Pruned once expired.
CREATE TABLE sso_codes (
    code_hash TEXT PRIMARY KEY NOT NULL,
    admission TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    expires_at TIMESTAMP(6) NOT NULL
);
