// The fl-leaf built-in's module (builtin_module.h): its one exported symbol makes the leaf that
// shoald asks for (fl_leaf_handler.h).
#include "shoal/fl/leaf/fl_leaf_handler.h"
#include "shoal/runtime/instance/builtin_module.h"

SHOAL_BUILTIN_MODULE(shoal::CreateFlLeafHandler)
