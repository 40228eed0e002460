from corral_memory_manager.app import main

main()
