//! The usage API: validation, who may read what, paging, retention.
