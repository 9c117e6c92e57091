from tracker.signals import main

main()
