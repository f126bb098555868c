"""How this process shares its CPU and memory: background threads that yield to requests, long
writes that give way to reads, the serving interpreter's settings."""
