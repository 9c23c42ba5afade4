"""``python scripts/campaign.py start GROUP | watch SECONDS | unpack FILE... | schedule | plan [GROUP]``: the GPU
lease's scheduler, :mod:`lab.campaign` (the same as ``python -m lab.campaign``), behind ``bash
scripts/gpu-campaign.sh``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lab.campaign.__main__ import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
