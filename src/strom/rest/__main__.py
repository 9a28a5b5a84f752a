from strom.rest.process import main

main()
