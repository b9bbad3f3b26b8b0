from envbuilder.cli import main

raise SystemExit(main())
