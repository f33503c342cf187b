from trtdiff.cli.main import main

main()
