"""Authorization: the least ACL set a replication needs (`acls`) and the pre-flight checks that ask
each cluster what the job's principal may do (`permissions`)."""
