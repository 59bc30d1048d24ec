"""Names of settings and client properties that hold a secret, and names that look like one and do
not: the one rule (``service.secrets.is_secret_name``) is held to both by tests/service/test_config.py,
and the chart's by tests/deploy/test_helm_chart.py."""

SECRET_NAMES = [
    "KAFKA_CLIENT_SASL_PASSWORD", "sasl.password", "sasl.oauthbearer.config", "sasl.oauthbearer.client.secret",
    "ssl.key.password", "ssl.keystore.password", "ssl.key.pem", "sasl.jaas.config",
    "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO", "basic.auth.user.info",
    "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key", "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.s3a.bucket.b1.secret.key", "spark.hadoop.fs.s3a.encryption.key",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "spark.hadoop.fs.azure.sas.c.acct.blob.core.windows.net",
    "spark.hadoop.fs.azure.account.oauth2.client.secret", "spark.authenticate.secret",
    "spark.kubernetes.authenticate.driver.oauthToken", "spark.ssl.keyStorePassword", "spark.ssl.keyPassword",
    "spark.hadoop.google.cloud.auth.service.account.private.key", "spark.hadoop.fs.gs.auth.credentials",
]
PUBLIC_NAMES = [
    "OUTPUT_KEY", "LEFT_PRIMARY_KEY", "RIGHT_PRIMARY_KEY", "LEFT_KEY_FORMAT", "key.serializer", "JOIN_SQL",
    "sasl.username", "sasl.mechanism", "ssl.key.location", "ssl.keystore.location", "ssl.certificate.pem",
    "ssl.ca.location", "spark.io.encryption.keySizeBits", "spark.network.crypto.keyLength",
    "spark.authenticate.secret.driver.file", "spark.authenticate.secret.executor.file",
    "spark.hadoop.fs.s3a.aws.credentials.provider", "spark.hadoop.fs.s3a.endpoint", "spark.ssl.keyStore",
    "SCHEMA_REGISTRY_URL", "KAFKA_BOOTSTRAP_SERVERS", "spark.executor.instances",
]
