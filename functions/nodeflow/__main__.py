import sys

from nodeflow.cli import main

sys.exit(main())
