from trtdiff.cli.app import main

main()
