from trtdiff.cli import main

main()
