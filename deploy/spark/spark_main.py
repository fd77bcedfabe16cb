"""Spark-operator entry point (`mainApplicationFile: local:///opt/replicator/spark_main.py`).

spark-submit runs this file on the driver; it starts the same long-running job as the
container's default command, `replicator run --config /etc/replicator/config.yaml`.
"""

from replicator.cli import main

if __name__ == "__main__":
    main(["run", "--config", "/etc/replicator/config.yaml"])
