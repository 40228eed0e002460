import sys

if sys.argv[1:2] == ["guestkit"]:
    # Building the VM guest kit needs no server, settings validation aside: keep it out of main().
    from corral_node_agent.backends.vm.guestkit import cli

    sys.exit(cli(sys.argv[2:]))

from corral_node_agent.app import main

main()
