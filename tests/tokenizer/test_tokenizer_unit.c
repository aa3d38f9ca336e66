#include "tests/test.h"
int main(void) { lh_test_begin("test_tokenizer_unit"); return lh_test_end(); }
