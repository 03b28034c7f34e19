//! The real binary: SIGTERM flushes, a killed process's spool is replayed at the next start.
