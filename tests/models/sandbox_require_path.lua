local m = require "../../../etc/passwd"
