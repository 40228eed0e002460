from corral_api.app import main

main()
