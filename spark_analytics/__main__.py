"""`python -m spark_analytics report ...`"""

import sys

from spark_analytics.cli import main

sys.exit(main())
