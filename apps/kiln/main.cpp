#include <cstdio>
int main() { std::puts("kiln: not built yet"); return 1; }
