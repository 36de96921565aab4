module github.com/yalue/onnxruntime_go

go 1.19
