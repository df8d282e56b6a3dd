from pi_dispatch.cli import main

main()
