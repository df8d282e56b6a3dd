from pi_dispatch.cli.app import main

main()
