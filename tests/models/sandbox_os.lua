os.execute("touch /tmp/glmc-sandbox-escaped")
