"""``python -m rlmedic.knowledge.known --check [DIR...]`` (see :mod:`rlmedic.knowledge.known.check`)."""

import sys

from rlmedic.knowledge.known.check import main

sys.exit(main())
