import sys

from .prompt import main

sys.exit(main())
