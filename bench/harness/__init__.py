"""What the benchmarks share, one module per job:

- :mod:`.data`: the scenarios, their seeded changelog generator, and the preloads (Avro topics
  with a ``rowkind`` header, debezium-json topics for Flink, Parquet files for Spark native);
- :mod:`.changejoin`: the service as a benchmark runs it (settings per scenario, one run until
  every input row is processed);
- :mod:`.processes`: runs as process trees: CPU and RSS from /proc, the broker's pid, a child
  process's JSON lines, the time to first output;
- :mod:`.outputs`: output topics read back (counts, kinds, the digest of the final table) and what
  the data fixes them to;
- :mod:`.peers`: the systems changejoin is compared with: Flink 2.3 (its own virtualenv and
  jars, bench/flink_job.py) and Spark's native join (bench/spark_native_job.py);
- :mod:`.latency`: produce-to-output latency runs at a paced input rate;
- :mod:`.logs`: what ``bench.compare`` printed, read back (its throughput lines, its latency
  table's rows), for the benches made of several invocations;
- :mod:`.report`: percentiles, the tables and plots, and where results are recorded
  (bench/results/).
"""
from pathlib import Path

#: The checkout: schemas/, bench/schemas/, bench/results/, and the working directory of child runs.
ROOT = Path(__file__).resolve().parent.parent.parent
