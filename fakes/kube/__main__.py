from fakes.kube.cli import main

main()
