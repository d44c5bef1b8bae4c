import sys

from graphmend.cli import main

sys.exit(main())
