from corral_node_agent.app import main

main()
