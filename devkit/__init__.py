"""devkit: tooling for development, tests and benchmarks; never shipped in the image.

- :mod:`devkit.jars`: jars from Maven Central, resolved from the poms under ``jars/`` into
  ``.cache/jars`` (``./dev jars``, ``python -m devkit.jars fetch [GROUP ...]``);
- :mod:`devkit.kafka_broker`: a single-node Apache Kafka (KRaft) from those jars, for the tests
  and the benchmarks (``python -m devkit.kafka_broker [PORT]``);
- :mod:`devkit.embedded_broker`: the demo's Tansu broker (the ``demo`` extra);
- :mod:`devkit.broker_process`: what the two brokers share (a child process on loopback).

The service (``service/``) never imports devkit at module level; only ``changejoin demo`` does,
inside the function that starts its broker (tests/service/test_structure.py checks both). The image
(deploy/Dockerfile) copies neither devkit/ nor bench/ (tests/deploy/test_deploy_docker.py).
"""
