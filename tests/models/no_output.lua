local tokens = glm.input("tokens")
