"""``python -m roadpubsub`` runs the command line."""

import sys

from roadpubsub.cli import main

sys.exit(main())
