// Catch2 2.x needs one translation unit to define main(); Catch2 3 links Catch2WithMain.
#if HIOS_CATCH2_MAJOR != 3
#define CATCH_CONFIG_MAIN
#include "tests/catch.hpp"
#endif
