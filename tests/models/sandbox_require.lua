local os = require "os"
