from collectors.agent.main import main

main()
