//! Bench-only helpers of `scripts/bench.sh` (see its header). Nothing here is part of aigw.
//!
//! - `bare`: a bare actix-web JSON handler, the reference `GET /auth/me` is compared against,
//!   and a bare proxy on aigw's upstream client, the floor chat's latency is compared against;
//! - `rate`: an open-loop load generator at a fixed request rate (wrk2 is not in Debian), for
//!   latencies that are not distorted by the generator waiting on slow answers;
//! - `keys`: prints freshly generated API keys with their digests, for bulk inserts in SQL.
