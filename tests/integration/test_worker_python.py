"""Spark's own Python workers, launched by a real Spark with the service's worker path, import the
installed PySpark rather than compile the zip Spark puts first on their path
(service/workersite/sitecustomize.py; the test session's Spark sets the path as the service does)."""
import pyspark


def test_spark_python_workers_import_the_installed_pyspark(spark):
    def where(batches):
        import pyarrow as pa
        import pyspark as worker_pyspark

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"file": worker_pyspark.__file__}])

    files = {row.file for row in spark.range(4, numPartitions=2).mapInArrow(where, "file string").collect()}
    assert files == {pyspark.__file__}
