"""`python -m vit_explorer ...` (also how torchrun starts multi-GPU training)."""

from .cli import main

raise SystemExit(main())
