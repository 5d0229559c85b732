from leases.fake_apiserver.cli import main

main()
