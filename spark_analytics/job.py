"""spark-submit entry: `spark-submit [--master M] spark_analytics/job.py report --logs DIR ...`.

The master is the one given to spark-submit unless `--master` follows `report`."""

import sys
from pathlib import Path

if __name__ == "__main__":
    # spark-submit puts this script's directory on the path, where our modules would shadow the standard
    # library's (`html`): replace it with the directory that holds the package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(here.parent))
    from spark_analytics.cli import main

    sys.exit(main(default_master=None))
