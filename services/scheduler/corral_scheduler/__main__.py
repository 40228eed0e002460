from corral_scheduler.app import main

main()
