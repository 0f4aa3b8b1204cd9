# Every Vulkan kernel kiln embeds: "name|shader|DEFINE,DEFINE". CMakeLists.txt compiles each with glslc.
# A shader's defines choose the storage type of its tensors: T_F16 makes the tensors float16 (arithmetic
# stays float32), otherwise float32. The matmul kernels name their three operands' types separately
# (A_F16, B_F16, C_F16) for attention, whose scores and probabilities stay float32. DIRECT builds the
# products without shared memory (gemm_direct.glsl) for devices that run on the CPU.
set(KILN_VULKAN_KERNELS
  "convert_f32_f16|convert.comp|DST_F16"
  "convert_f16_f32|convert.comp|SRC_F16"
  "matmul_f32|matmul.comp"
  "matmul_f16|matmul.comp|A_F16,B_F16,C_F16"
  "matmul_scores_f16|matmul.comp|A_F16,B_F16"
  "matmul_pv_f16|matmul.comp|B_F16,C_F16"
  "conv2d_f32|conv2d.comp"
  "conv2d_f16|conv2d.comp|T_F16"
  "matmul_direct_f32|matmul.comp|DIRECT"
  "matmul_direct_f16|matmul.comp|DIRECT,A_F16,B_F16,C_F16"
  "matmul_scores_direct_f16|matmul.comp|DIRECT,A_F16,B_F16"
  "matmul_pv_direct_f16|matmul.comp|DIRECT,B_F16,C_F16"
  "conv2d_direct_f32|conv2d.comp|DIRECT"
  "conv2d_direct_f16|conv2d.comp|DIRECT,T_F16"
  "group_norm_stats_f32|group_norm_stats.comp"
  "group_norm_stats_f16|group_norm_stats.comp|T_F16"
  "group_norm_apply_f32|group_norm_apply.comp"
  "group_norm_apply_f16|group_norm_apply.comp|T_F16"
  "layer_norm_f32|layer_norm.comp"
  "layer_norm_f16|layer_norm.comp|T_F16"
  "softmax_f32|softmax.comp"
  "softmax_f16|softmax.comp|T_F16"
  "unary_f32|unary.comp"
  "unary_f16|unary.comp|T_F16"
  "binary_f32|binary.comp"
  "binary_f16|binary.comp|T_F16"
  "geglu_f32|geglu.comp"
  "geglu_f16|geglu.comp|T_F16"
  "layout_f32|layout.comp"
  "layout_f16|layout.comp|T_F16"
  "timestep_embedding_f32|timestep_embedding.comp"
  "timestep_embedding_f16|timestep_embedding.comp|T_F16"
)
