DROP TABLE response_owners;
