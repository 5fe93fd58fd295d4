package main

// Version is what `extauthz -version` prints; scripts/extauthz.sh builds into a cache
// directory of this name, so change both together.
const Version = "0.1.0"
