from rlmedic.ui.cli import main

main()
