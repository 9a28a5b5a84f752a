from strom.lake.process import main

main()
