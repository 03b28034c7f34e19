//! Failovers under load: the database's primary switched over to its standby while two nodes
//! serve budgeted calls (`pg_switchover`), on a PostgreSQL cluster of the test's own
//! (`pg_cluster`).

mod pg_cluster;
mod pg_switchover;
