"""The configuration keys of ZooKeeper security (BookKeeper's spellings), named in the errors of
both the ACL rules (``zk_acl``) and the mapping of kazoo's refusals (``zk_errors``)."""

ENABLE_KEY = "zkEnableSecurity"
DIGEST_KEY = "zkDigestAuthFile"
BOOKIE_DIGEST_KEY = "zkBookieDigestAuthFile"
