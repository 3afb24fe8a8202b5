"""spark-submit entry: `spark-submit [--master M] spark_analytics/job.py report --logs DIR ...`.

The master is the one given to spark-submit unless `--master` follows `report`."""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # spark-submit puts only this directory there
    from spark_analytics.cli import main

    sys.exit(main(default_master=None))
